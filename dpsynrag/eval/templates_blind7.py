"""The ``blind7`` note and query templates of the ``conditions`` and ``films`` generators.

A seventh variant, written by a helper for one blind measurement (made with facts rules 7,
see docs/evaluation.md); read since, so it is a development set now. Chosen by
``templates="blind7"`` in :mod:`dpsynrag.eval.datasets_ordinary`, which maps the variant
name to these sets. Same placeholders and rules as the other variants there (each note holds
its answer verbatim; queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_BLIND7", "FILM_TEMPLATES_BLIND7"]

# Blind7: measured blind once with facts rules 7; read since.
CONDITION_TEMPLATES_BLIND7 = TemplateSet(notes=(
    "Video appointment, {date}. Clinician: Dr. {doctor}. Patient {name}, {age}, joined from "
    "home; identity confirmed with date of birth and address. Main concern: {symptoms}. No "
    "red flags on questioning. Impression: {condition}. Plan: {treatment}; to book a "
    "face-to-face review if not improving within a week. Consent for remote consultation "
    "recorded.",
    "{name} {age}y - {symptoms}. ?{condition}. Started {treatment}. Dr {doctor}, {date}",
    "Statement of fitness for work. I assessed {name} (age {age}) on {date} and advise that "
    "they are not fit for work because of {condition}. They have had {symptoms}. Treatment: "
    "{treatment}. I will reassess if needed. Signed: Dr. {doctor}.",
    "Occupational health review ({date}). Employee {name}, {age}, was referred after a spell "
    "of sickness absence. Reported symptoms: {symptoms}. Their GP, Dr. {doctor}, has "
    "diagnosed {condition} and prescribed {treatment}. Recommend a phased return over "
    "a fortnight, with reduced hours in the first week.",
    "From {name}'s notebook, {date}. Finally got in to see Dr. {doctor} about the "
    "{symptoms}. The doctor thinks it's {condition} and I'm to start {treatment}. Not bad "
    "going for someone who's {age}, apparently.",
    "{date},\"{name}\",{age},\"{condition}\",\"{symptoms}\",\"{treatment}\",\"Dr. {doctor}\"",
    "{name} is a {age}-year-old who attends today, {date}, accompanied by a relative. "
    "Recently they have noticed {symptoms}. They have tried over-the-counter remedies "
    "without much benefit. No significant past medical history; non-smoker; drinks alcohol "
    "occasionally. Observations within normal limits. On balance I think this is most likely "
    "{condition}. We discussed the options and agreed on {treatment}. Advised to return if "
    "things worsen or new symptoms develop. Dr. {doctor}",
    "Text sent {date} to {name} ({age}): Following your appointment, Dr. {doctor} has "
    "confirmed {condition} and sent {treatment} to your nominated pharmacy. If the "
    "{symptoms} persist or worsen, please call the surgery. Do not reply to this message.",
    "Walk-in centre\nDate: {date}\nSeen by: Dr. {doctor}\nName: {name}   Age: {age}\n"
    "PC: {symptoms}\nDx: {condition}\nMx: {treatment}\nFollow-up: own GP if not settling",
    "Dear {name},\nThank you for coming to see me in clinic on {date}. You told me about "
    "{symptoms}. After examining you, I think these are explained by {condition}. As we "
    "discussed, the plan is {treatment}. I have copied this letter to your GP.\nYours "
    "sincerely,\nDr. {doctor}\n(Patient age at appointment: {age})",
    "Appointment {date} with Dr. {doctor} - {name}, {age}. Reason for booking (entered by "
    "patient): \"{symptoms}\". Outcome: {condition}; {treatment}.",
    "{date}: {condition} in {name} ({age}); presented with {symptoms}; Dr. {doctor} gave "
    "{treatment}.",
), queries=(
    "{symptoms} what could it be",
    "Hi all, {asker} here, long-time reader. For about a month I've had {symptoms}. My GP "
    "can't see me until next week. Does anyone recognise this combination?",
    "My mum is in her seventies and has {symptoms}. What is she likely to be diagnosed with?",
    "Nurse advice line, caller {asker}: reports {symptoms}. Likely diagnosis?",
    "What's the usual diagnosis for a patient presenting with {symptoms}?",
    "Been putting up with {symptoms} and it's getting me down. Any idea what's behind it?",
    "{asker} asking: could {symptoms} all be part of one condition, and which?",
    "Teenage son has {symptoms}. What should we suspect?",
    "Help please - {symptoms}. Is there a single explanation?",
))

FILM_TEMPLATES_BLIND7 = TemplateSet(notes=(
    "{date} - {name} logged {title} ({director}). Genre tag: {genre}. Rating: {stars}/5. "
    "Synopsis shown in app: {plot}.",
    "{name}: ok finally watched {title}. it's that {genre} with {plot}. {stars} stars from "
    "me ({date})",
    "Public library - AV loan\nBorrower: {name}\nDue back: {date}\nItem: {title} (DVD), "
    "directed by {director}\nCatalogue summary: a {genre} featuring {plot}.",
    "Some films sneak up on you, and for {name} (writing on {date}) {title} was one of them. "
    "On the face of it this is a fairly standard {genre}: {plot}. What lifts it is "
    "{director}'s patience with the material; nothing is rushed, and the performances are "
    "allowed to breathe. Final score: {stars}/5.",
    "Episode notes ({date}): this week our guest {name} champions {title}, a {genre} from "
    "{director}. We get into {plot}, and why it deserves better than its {stars}-star "
    "average.",
    "{title}\t{director}\t{genre}\t{stars}\t{date}\t{name}\t{plot}",
    "{name} - remember to return {title} by {date}! (the {genre} with {plot})",
    "Booking confirmed. Customer: {name}. Film: {title} ({genre}). Screening: {date}, screen "
    "3, seats F7-F8. Synopsis: {plot}. Director: {director}.",
    "Film studies seminar, {date}. Presenter: {name}. Text: {title}, by {director}. "
    "Discussion focused on how the {genre} handles {plot}. Class rating {stars}/5.",
    "{title}!!! {plot}. what a {genre}. {stars}/5 #movienight ({name}, {date})",
    "Email from {name}, sent {date}: You have to see {title}. I know you're not big on this "
    "kind of {genre}, but {director} manages {plot} without it ever feeling forced. I'd give "
    "it {stars} stars.",
    "Parent review by {name}, posted {date}: {title} is a {genre} from {director}; expect "
    "{plot}. Fine for teens in my view. {stars}/5.",
), queries=(
    "what's that {genre} with {plot}",
    "{asker} here. My grandad keeps describing a film he loved: {plot}. Probably a {genre}. "
    "Does anyone know what it's called?",
    "Can someone identify a movie for me? All I remember is {plot}.",
    "Which {genre} features {plot}? It's on my mind and I can't place its name.",
    "movie where there's {plot}, what's it called",
    "My book group drifted onto films and nobody could recall one with {plot}. What is it?",
    "Looking for a {genre} I saw on TV once, featuring {plot}. Any ideas what it was?",
    "Question from {asker}: what is that movie with {plot} called?",
    "Trying to settle an argument: which film had {plot}?",
))
